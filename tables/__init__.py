"""Tables of the dedup worker: the transactional store, the transactional table, seen_ids."""
