"""The rules a run is judged by, as data: completion checks and their evidence, what a
step read, the step index, each step's verdict, where a run stands. No rendering."""
