"""External effects: an effect's key from its identity, its intent before the write and
its confirmation after, the run's effect records, and credentials kept out of them."""
