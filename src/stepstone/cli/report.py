"""`stepstone report`: one self-contained HTML page about a run (being built)."""
