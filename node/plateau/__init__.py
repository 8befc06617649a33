"""plateau: a columnar data aggregator node."""
