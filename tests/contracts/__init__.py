"""Contract suites: behaviour every implementation of a protocol must show."""
