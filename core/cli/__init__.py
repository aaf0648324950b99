"""The command line: `python -m core --help`. `args` holds the shared argument types and output,
`main` the catalog, cost-model and memory commands, `simulate` the simulation command."""
