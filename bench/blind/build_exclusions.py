"""Rebuild a blind collection's exclusion lists from every labelled set of the repository.

    python bench/blind/build_exclusions.py OUT_DIR

Writes OUT_DIR/exclude_repos.txt (every repository or site any set's labels or READMEs cite:
``owner/name`` for GitHub, ``hf:owner/name`` for Hugging Face, ``host/first/two`` otherwise),
OUT_DIR/exclude_urls.txt (every URL cited) and OUT_DIR/existing_sha256.txt (the digest of every file of
every set), as ``PROTOCOL.md`` asks collectors to check with ``check_new.py``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
SETS = [ROOT / "tests" / "fixtures" / "real", ROOT.parent / "shared" / "real-logs"]


def repo_key(url: str) -> str | None:
    p = urlparse(url)
    parts = [x for x in p.path.split("/") if x]
    host = p.netloc.lower()
    if host in ("github.com", "raw.githubusercontent.com") and len(parts) >= 2:
        return f"{parts[0]}/{parts[1]}".lower()
    if host == "huggingface.co" and parts:
        keep = 3 if parts[0] in ("datasets", "spaces") else 2
        return "hf:" + "/".join(parts[:keep]).lower() if len(parts) >= keep else None
    if host == "gist.github.com" and len(parts) >= 2:
        return "gist:" + parts[1].lower()
    return host + "/" + "/".join(parts[:2]).lower() if host else None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    urls: list[str] = []
    digests: set[str] = set()
    for base in SETS:
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*")):
            if not f.is_file():
                continue
            digests.add(hashlib.sha256(f.read_bytes()).hexdigest())
            if f.name.startswith("labels") and f.suffix == ".json":
                doc = json.loads(f.read_text())
                entries = doc if isinstance(doc, list) else doc.get("logs") or doc.get("labels") or []
                urls += [e["source_url"] for e in entries if isinstance(e, dict) and e.get("source_url")]
            elif f.name in ("README.md", "RESERVED.txt"):
                urls += re.findall(r"https?://[^\s)>\]`\"]+", f.read_text(errors="replace"))
    repos = sorted({k for u in urls if (k := repo_key(u))})
    (out / "exclude_repos.txt").write_text("\n".join(repos) + "\n")
    (out / "exclude_urls.txt").write_text("\n".join(sorted(set(urls))) + "\n")
    (out / "existing_sha256.txt").write_text("\n".join(sorted(digests)) + "\n")
    print(f"{len(urls)} URLs, {len(repos)} repositories or sites, {len(digests)} file digests -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
