"""Runs Sluice's migrations and queries on a current ClickHouse (26.x) in
process, through chDB (PyPI chdb-core), for analytics' comparison test.

Reads one JSON job on stdin:
  {"statements": ["CREATE …", …],            # run in order, results ignored
   "inserts": [{"sql": "INSERT INTO t (a, b) FORMAT JSONEachRow",
                "rows": [{"a": 1, "b": "x"}, …]}],
   "queries": [{"name": "…", "sql": "SELECT …"}]}
and writes one JSON object to stdout:
  {"version": "26.9.…", "results": {"name": {"columns": [...], "rows": [[…], …]}}}
A failing statement or query exits 1 with a one-line error on stderr naming it.
"""

import json
import sys
import tempfile

import chdb
from chdb import session as chs


def main():
    job = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="sluice-chdb-") as d:
        s = chs.Session(d)
        try:
            out = {"version": str(s.query("SELECT version()", "TabSeparated")).strip(), "results": {}}
            for i, stmt in enumerate(job.get("statements", [])):
                run(s, stmt, "statement %d" % (i + 1))
            for ins in job.get("inserts", []):
                body = "\n".join(json.dumps(r, separators=(",", ":")) for r in ins["rows"])
                run(s, ins["sql"] + "\n" + body, "insert " + ins["sql"][:60])
            for q in job.get("queries", []):
                res = run(s, q["sql"], "query " + q["name"], fmt="JSONCompact")
                doc = json.loads(res.bytes() or b'{"meta":[],"data":[]}')
                out["results"][q["name"]] = {
                    "columns": [m["name"] for m in doc.get("meta", [])],
                    "types": [m["type"] for m in doc.get("meta", [])],
                    "rows": doc.get("data", []),
                }
        finally:
            s.close()
    json.dump(out, sys.stdout)


def run(s, sql, what, fmt="TabSeparated"):
    try:
        return s.query(sql, fmt)
    except Exception as e:  # chdb raises its own error types
        msg = " ".join(str(e).split())
        sys.stderr.write("chdb %s (%s): %s: %s\n" % (chdb.__version__, what, sql.split("\n")[0][:120], msg[:600]))
        sys.exit(1)


if __name__ == "__main__":
    main()
