"""The host programs' library: modules that are not programs themselves (hostside/__init__.py PROGRAMS names those),
imported by the programs and, where the controller shares their logic, by the controller. Standard library only."""
