"""Programs uploaded to and run on the target host with its system python3 (standard library only)."""
