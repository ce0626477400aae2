#!/usr/bin/env python3
"""scripts/chdb_server.py: run one ClickHouse 26.9 server from the chdb-core wheel.

Started (in the background, by scripts/clickhouse-modern.sh) with the venv's
python that has chdb-core installed. It writes DIR/config.xml and
DIR/users.xml, changes into DIR (chdb reads config.xml from the working
directory), and calls the low-level binding `chdb._chdb.query` with a query
that first starts the HTTP and native listeners and then runs until the
process is killed. The higher-level `chdb.query()` / `connect()` refuse to
start servers ("start_servers_callback is not set").

Users (DIR/users.xml, plus DIR/users.d/ = deploy/clickhouse-modern/
spate-test-users.xml, which the docker-compose service loads too):
  default      no password, access management on, the stock profile (on 26.9
               that profile already has async_insert=1, wait_for_async_insert=1)
  spate_async  password `spate-test-pw`, profile `async_acks`: async_insert=1,
               wait_for_async_insert=0, a 3 s flush timeout: a server that
               answers an INSERT before the rows are written, unless the
               client sets async_insert=0 itself. (The chdb build has no
               async insert queue: it accepts these settings and still
               inserts synchronously.)
  spate_async_locked  password `spate-test-pw`, async_insert=1 under a readonly
               constraint: any query that sets async_insert itself fails
               (code 452), which shows whether a client sets it explicitly

Usage: chdb_server.py --dir DIR --host ADDR --http-port P --tcp-port Q
       [--remote-servers FILE]   (a <remote_servers> fragment for Distributed)
"""
import argparse
import os
import shutil
import sys

CONFIG = """<clickhouse>
  <!-- written by scripts/chdb_server.py -->
  <listen_host>{host}</listen_host>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <users_config>users.xml</users_config>
  <!-- when each part was committed: the freshness test's reference
       (tests/e2e/e2e_freshness.rs) -->
  <part_log>
    <database>system</database>
    <table>part_log</table>
    <flush_interval_milliseconds>500</flush_interval_milliseconds>
  </part_log>
{extra}</clickhouse>
"""

USERS = """<clickhouse>
  <!-- written by scripts/chdb_server.py; the test users are in users.d/ -->
  <profiles>
    <default></default>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
      <access_management>1</access_management>
    </default>
  </users>
  <quotas><default></default></quotas>
</clickhouse>
"""

# The test users (spate_async, spate_async_locked), shared with the
# docker-compose service `clickhouse-modern`.
TEST_USERS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "clickhouse-modern",
    "spate-test-users.xml",
)

# Starts both listeners, then keeps the server alive: one row every 3 s for
# ~95 years. Killing the process is the only way it ends.
SERVE = (
    "SYSTEM START LISTEN HTTP; SYSTEM START LISTEN TCP; "
    "SELECT sleepEachRow(3) FROM numbers(1000000000) "
    "SETTINGS max_block_size=1, function_sleep_max_microseconds_per_block=0 FORMAT Null"
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--tcp-port", type=int, required=True)
    ap.add_argument("--remote-servers")
    a = ap.parse_args()
    d = os.path.abspath(a.dir)
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    extra = ""
    if a.remote_servers:
        with open(a.remote_servers) as f:
            extra = f.read()
    with open(os.path.join(d, "config.xml"), "w") as f:
        f.write(CONFIG.format(host=a.host, http=a.http_port, tcp=a.tcp_port, extra=extra))
    with open(os.path.join(d, "users.xml"), "w") as f:
        f.write(USERS)
    os.makedirs(os.path.join(d, "users.d"), exist_ok=True)
    shutil.copyfile(TEST_USERS, os.path.join(d, "users.d", "spate-test-users.xml"))
    os.chdir(d)
    import chdb._chdb as binding  # noqa: E402 (after chdir: it reads ./config.xml)

    binding.query(SERVE, "CSV", path=os.path.join(d, "data"))
    # The query only returns if the server was told to stop.
    sys.exit("chdb_server.py: the serving query returned; server stopped")


if __name__ == "__main__":
    main()
