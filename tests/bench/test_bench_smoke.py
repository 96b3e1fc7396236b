"""Every bench script runs (tiny sizes, Scrapy skipped): a bench that no longer matches the
package fails here, not in the hands of the next person measuring (`make bench`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import BENCH

RUNS = {
    "bloom.py": "--quick --throughput-urls 2000 --repeat 1 --accuracy-urls 5000",
    "bodies.py": "--pages 50 --size 5000",
    "dashboard.py": "--hosts 2000 --crawls 3 --repeat 2 --broad-hosts 5 --broad-pages 3 "
    "--broad-repeat 1 --window 2",
    "near_duplicates.py": "--originals 50",
    "parse.py": "--links 20000 --repeat 2 --max-seconds 60 --text-pages 5",
    "frontier.py": "--urls 2000 --domains 5 --sample-seconds 3 --admit-pages 50 "
    "--cancel-timeout 30",
    "memory.py": "--urls 5000 --domains 100 --release 10 --simhash-pages 100",
    "politeness.py": "--only 1x5",
    "crawl.py": "--pages 60 --layouts 8x1:1 --skip-scrapy --timeout 60",
    "broad.py": "--hosts 5 --pages 3 --modes fast --layouts threads:8x1:1 --skip-scrapy "
    "--timeout 60",
    "scaling.py": "--hosts 5 --pages 3 --fetchers 1 --states one --threads 8 --timeout 60",
    "render.py": "--pages 12 --mixed-hosts 2 --mixed-pages 6 --skip-scrapy --timeout 60",
    "recrawl.py": "--pages 20 --new 1 --page-bytes 2000 --timeout 60",
    "adaptive.py": "--pages 20 --days 2",
    "warc_records.py": "--pages 20 --rounds 1",
    "redis_round_trips.py": "--seconds 0.5 --threads 4",
    "failover.py": "--pages 60 --kills 1 --timeout 120",
    "profile.py": "--hosts 5 --pages 3 --out profile -- --layouts threads:8x1:1 --timeout 60",
    "cpu_by_library.py": "--seconds 1 --settle 0 -- --hosts 5 --pages 3 "
    "--layouts threads:8x1:1 --skip-scrapy --timeout 60",
    "engine_model.py": "--hosts 5 --pages 3 --rounds 1 --models ours,threads,hybrid,asyncio "
    "--with-ours --timeout 60",
    "redis_cpu.py": "--seconds 1 --settle 0 -- --hosts 5 --pages 3 --layouts threads:8x1:1 "
    "--timeout 60",
    "cancel.py": "--seeds 2000 --pages 20 --window 1 --timeout 60",
    # 8 s of crawling: the first kill comes at 5 s.
    "process_faults.py": "--only kill --pages 80 --rate 10 --runs 1 --timeout 120",
}
#: More runs of a script, for a mode with a code path of its own: name -> (script, arguments).
VARIANTS = {
    "frontier.py --tails": (
        "frontier.py",
        "--tails --urls 3000 --hosts 20 --chunk 16 --release 1000 --flush-seconds 0",
    ),
    "adaptive.py --warm-days": ("adaptive.py", "--pages 20 --days 2 --warm-days 1"),
    # Heads of 2 URLs, chunks of 2: every host of the polite crawl spills (_spill.py).
    "broad.py --frontier-heads": (
        "broad.py",
        "--hosts 5 --pages 6 --modes polite --layouts threads:8x1:1 --skip-scrapy --timeout 60 "
        "--frontier-heads 0,2 --frontier-chunk 2",
    ),
    "broad.py --https --real-sizes": (
        "broad.py",
        "--hosts 5 --pages 3 --modes fast --layouts threads:8x1:1 --skip-scrapy --timeout 60 "
        "--https --real-sizes",
    ),
    # Our crawl into a SeaweedFS bucket beside a directory, twice in swapped order (issue 48).
    "broad.py --outputs local,s3": (
        "broad.py",
        "--hosts 5 --pages 3 --modes fast --layouts threads:8x1:1 --skip-scrapy --timeout 60 "
        "--outputs local,s3 --repeat 2",
    ),
}


def test_every_bench_script_has_a_smoke_run():
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(RUNS), scripts ^ set(RUNS)


@pytest.mark.parametrize("run", sorted([*RUNS, *VARIANTS]))
def test_bench_script_runs(run: str, tmp_path: Path):
    script, arguments = VARIANTS.get(run, (run, RUNS.get(run, "")))
    result = subprocess.run(
        [sys.executable, str(BENCH / script), *arguments.split()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    assert result.stdout.strip(), "printed no figures"


@pytest.mark.parametrize(
    "arguments",
    ["--models bogus", "--models threads,", "--concurrency 0", "--hogs -1", "--timeout 0"],
)
def test_engine_model_refuses_bad_arguments_before_it_starts(arguments: str, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, str(BENCH / "engine_model.py"), *arguments.split()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("engine_model.py: error: --")
    assert "Traceback" not in result.stderr and not result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written, no server or Redis started
