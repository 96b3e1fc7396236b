"""Realistic URLs for the frontier benchmarks (bench/frontier.py, bench/_frontier_tails.py)."""

from __future__ import annotations

from crawler_tasks.web.urls import normalize

WORDS = [
    "summer",
    "linen",
    "shirt",
    "classic",
    "blue",
    "garden",
    "chair",
    "oak",
    "table",
    "lamp",
    "vintage",
    "leather",
    "boots",
    "wool",
    "scarf",
    "ceramic",
    "mug",
    "travel",
]


def realistic_urls(n: int, domains: int) -> list[str]:
    """Shop/news/blog-like URLs (~80 characters) over ``domains`` hosts, round-robin."""
    out = []
    for i in range(n):
        d = i % domains
        a, b, c = WORDS[i % 18], WORDS[(i // 18) % 18], WORDS[(i // 324) % 18]
        if d % 3 == 0:
            url = f"https://www.shop{d}.example.com/en-gb/{a}/{b}-{c}-{a}-{i}.html?variant={i % 7}"
        elif d % 3 == 1:
            url = f"https://news{d}.example.org/{2020 + i % 5}/{i % 12 + 1:02d}/{a}-{b}-{c}-{i}/"
        else:
            url = f"https://blog.site{d}.example.net/posts/{i}/{a}-{b}-{c}?utm_source=feed"
        out.append(normalize(url))
    return out
