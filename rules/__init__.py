"""One module per rule; each defines one `fsdplint.rule.Rule` subclass (installed as `fsdplint.rules`)."""
