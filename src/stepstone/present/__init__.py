"""Everything shown to people: a run's status as text, HTML and rich output, a step
cell's outcome, `show` and `diff`, the hand-off brief, and the HTML report (`report/`)."""
