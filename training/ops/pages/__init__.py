"""Helpers shared by every HTML page the pipeline writes (validation page, eval reports).

The pages are opened on machines with no network, from files or an artifact store, so each
must render from its own bytes; `offline` finds what a page would try to fetch.
"""
