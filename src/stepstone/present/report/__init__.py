"""`stepstone report`'s HTML page: the page, what the run's history says, each step's
card, the timeline, the stylesheet."""
