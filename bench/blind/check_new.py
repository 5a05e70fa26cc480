#!/usr/bin/env python3
"""Usage: python3 /work/collect/check_new.py FILE [REPO_OR_URL]
Says whether FILE's sha256 is already in an earlier set, and whether a repository
(owner/name, or a URL) is excluded or already claimed by another collector."""
import hashlib, sys, re
from urllib.parse import urlparse
f = sys.argv[1]
h = hashlib.sha256(open(f, 'rb').read()).hexdigest()
old = set(open('/work/collect/existing_sha256.txt').read().split())
print(f"{f}: sha256 {h[:16]}... {'ALREADY IN AN EARLIER SET - drop it' if h in old else 'new'}")
if len(sys.argv) > 2:
    r = sys.argv[2]
    if '://' in r:
        p = [x for x in urlparse(r).path.split('/') if x]
        r = '/'.join(p[:2])
    r = r.lower()
    excl = set(open('/work/collect/exclude_repos.txt').read().lower().split())
    claims = open('/work/collect/claims.txt').read().lower().split('\n')
    print(f"{r}: {'EXCLUDED (earlier set)' if r in excl else 'not in an earlier set'}")
    cl = [c for c in claims if c.split()[1:2] == [r]]
    print(f"claims: {cl if cl else 'none'}")
