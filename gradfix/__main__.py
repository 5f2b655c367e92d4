from gradfix.cli import main

main()
