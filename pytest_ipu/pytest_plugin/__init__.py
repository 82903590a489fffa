"""The pytest glue: the plugin's hooks, options, marker, fixtures, repeats and the run's session."""
