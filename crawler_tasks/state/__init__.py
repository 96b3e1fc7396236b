"""The crawl's state in Redis: key names, the Python<->Lua formats, the Lua scripts, and the
components built on them (Bloom filter, frontier, politeness, completion ledger, recrawl
validators, robots cache, options, events, schedules). Imports ``web`` and the foundation.
"""
