"""Program suites, random generators, and abstract instance files."""
