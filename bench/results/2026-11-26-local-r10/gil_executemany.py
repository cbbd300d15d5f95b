import sqlite3, threading, time, os
db = "/tmp/gilmany.db"
if os.path.exists(db): os.remove(db)
c = sqlite3.connect(db, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, state INT, job BLOB)")
c.execute("BEGIN"); c.executemany("INSERT INTO jobs VALUES (?, 1, ?)", [(f"{i:012x}", b"x" * 300) for i in range(20000)]); c.execute("COMMIT")
def one(n):
    t = time.perf_counter(); c.execute("BEGIN")
    for i in range(n): c.execute("UPDATE jobs SET state = 2, job = ? WHERE id = ?", (b"y" * 300, f"{i:012x}"))
    c.execute("COMMIT"); return (time.perf_counter() - t) / n * 1e6
def many(n):
    t = time.perf_counter(); c.execute("BEGIN")
    c.executemany("UPDATE jobs SET state = 2, job = ? WHERE id = ?", [(b"y" * 300, f"{i:012x}") for i in range(n)])
    c.execute("COMMIT"); return (time.perf_counter() - t) / n * 1e6
print(f"alone: one by one {one(3000):.1f} us, executemany {many(3000):.1f} us")
stop = False
def busy():
    x = 0
    while not stop: x += 1
th = threading.Thread(target=busy); th.start()
print(f"busy thread: one by one {one(300):.1f} us, executemany {many(300):.1f} us")
stop = True; th.join()
