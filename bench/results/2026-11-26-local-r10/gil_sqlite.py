import sqlite3, threading, time, sys, os
db = "/tmp/gilsql.db"
if os.path.exists(db): os.remove(db)
c = sqlite3.connect(db, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, job BLOB)")
c.execute("BEGIN")
c.executemany("INSERT INTO jobs VALUES (?, ?)", [(f"{i:012x}", b"x" * 300) for i in range(20000)])
c.execute("COMMIT")
def run(n=3000):
    t = time.perf_counter()
    c.execute("BEGIN")
    for i in range(n):
        c.execute("SAVEPOINT op")
        c.execute("SELECT job FROM jobs WHERE id = ?", (f"{i:012x}",)).fetchone()
        c.execute("UPDATE jobs SET job = ? WHERE id = ?", (b"y" * 300, f"{i:012x}"))
        c.execute("RELEASE op")
    c.execute("COMMIT")
    return (time.perf_counter() - t) / n * 1e6
print(f"alone: {run():.1f} us per update (4 statements)")
stop = False
def busy():
    x = 0
    while not stop:
        x += 1
th = threading.Thread(target=busy); th.start()
print(f"with a busy Python thread: {run(300):.1f} us per update")
def semi():  # a thread like the edge loop: short bursts of Python, then blocking waits
    while not stop:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0005: pass
        time.sleep(0.0002)
stop = True; th.join(); stop = False
th = threading.Thread(target=semi); th.start()
print(f"with a bursty Python thread: {run(1000):.1f} us per update")
stop = True; th.join()
