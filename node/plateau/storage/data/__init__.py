"""Segment formats and their readers and writers: what lies in the files on disk."""
