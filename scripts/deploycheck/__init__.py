"""The checks of scripts/check_deploy.py, by what they check (see its docstring)."""
