"""The rules: one module a rule, one ``Rule`` subclass a module. The registry scans only this package."""
