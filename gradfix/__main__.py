from gradfix.cli.app import main

main()
