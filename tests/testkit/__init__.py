"""The test suite's shared helpers: independent reference implementations, tiny trainers and runs, fixed
completions, notebook execution and its checks, figure checks. Imported as ``testkit.<module>``; a helper used by one
folder sits in that folder instead."""
