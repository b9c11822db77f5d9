"""Partition ownership: which task owns which SSPs."""
