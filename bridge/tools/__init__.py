"""The doctor, the demo and the one client-side stdio peer."""
