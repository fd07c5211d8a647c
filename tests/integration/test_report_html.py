"""fructosa-report --format html, drawn by a real browser. A job whose figures the test sets: two
lagents (hosts nodea, nodeb) read made-up cgroup v2 trees in the test's directory (JobCgroup's
cgroup_root, scheduler = regex; no real cgroup is needed), where the test makes cpu.stat's
usage_usec rise at a known rate, memory.current ramp up under memory.max, and cpuset.cpus.effective
give the allocation; lmaster stores about 60 samples per host in HDF5. Then the report's HTML is
rendered by headless Chromium and the screenshot read with PIL: each of the four plots (cores and
memory, per node) must show the plot line's colour, the memory plots the limit's, and the page
must not be blank.

Needs chromium and python3-pil (.ci/install-deps --tests installs them): without them the test
fails, saying so.
"""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import unittest

from fructosa_test import FructosaTestCase, read_text, wait_for, LAGENT

try:
    from PIL import Image
except ImportError:  # reported by the test, which fails: never a silent skip
    Image = None

REPORT = os.environ.get("FRUCTOSA_REPORT", "fructosa-report")
JOB = 77
MIB = 1 << 20
INTERVAL = 0.1
SAMPLES = 60
# host: (cores busy, cpuset, memory.max); memory.current ramps from 64 MiB to 75 % of the limit.
HOSTS = {"nodea": (1.5, "0-3", 512 * MIB), "nodeb": (3.0, "0-7", 256 * MIB)}
# report/render_html.cpp's kLineColour and kLimitColour.
LINE = (0xd1, 0x00, 0x7b)
LIMIT = (0xf0, 0x8c, 0x00)
PLOT_BACKGROUND = (0xf4, 0xf7, 0xfa)
WINDOW = (1200, 2000)


def near(pixel, colour, tolerance=40):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour))


class FakeJobCgroup:
    """A cgroup v2 tree with one job, job_<id> under fructosa.slice, whose files the test rewrites
    in place (same width, one pwrite: lagent keeps them open and reads them again)."""

    def __init__(self, root, cores, cpuset, limit):
        self.cores, self.limit = cores, limit
        self.job = os.path.join(root, "fructosa.slice", f"job_{JOB}")
        os.makedirs(self.job)
        for path, text in [(os.path.join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n"),
                           (os.path.join(root, "cgroup.procs"), ""),
                           (os.path.join(root, "fructosa.slice", "cgroup.procs"), ""),
                           (os.path.join(self.job, "cgroup.procs"), f"{os.getpid()}\n"),
                           (os.path.join(self.job, "cpuset.cpus.effective"), cpuset + "\n"),
                           (os.path.join(self.job, "memory.max"), f"{limit}\n")]:
            with open(path, "w") as f:
                f.write(text)
        self.files = {name: os.open(os.path.join(self.job, name), os.O_WRONLY | os.O_CREAT, 0o644)
                      for name in ["cpu.stat", "memory.current"]}
        self.update(0, 0)

    def update(self, elapsed, fraction):
        usec = int(self.cores * elapsed * 1e6)
        stat = f"usage_usec {usec:015d}\nuser_usec {usec:015d}\nsystem_usec {0:015d}\n"
        memory = int(64 * MIB + fraction * (0.75 * self.limit - 64 * MIB))
        os.pwrite(self.files["cpu.stat"], stat.encode(), 0)
        os.pwrite(self.files["memory.current"], f"{memory:015d}\n".encode(), 0)

    def close(self):
        for fd in self.files.values():
            os.close(fd)


class ReportHtmlTest(FructosaTestCase):
    def run_job(self):
        """Runs the job on both fake nodes for SAMPLES intervals; lmaster stores it in data.h5."""
        cgroups = {host: FakeJobCgroup(self.path(f"cgroup-{host}"), *spec) for host, spec in HOSTS.items()}
        for cgroup in cgroups.values():
            self.addCleanup(cgroup.close)
        master, port = self.start_master(extra="")
        duration = SAMPLES * INTERVAL + 0.5
        started = time.monotonic()
        stop = threading.Event()

        def feed():
            while not stop.is_set():
                elapsed = time.monotonic() - started
                for cgroup in cgroups.values():
                    cgroup.update(elapsed, min(1.0, elapsed / duration))
                stop.wait(0.01)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        self.addCleanup(lambda: (stop.set(), feeder.join()))
        agents = []
        for host in HOSTS:
            jobs = (f"[jobs]\nscheduler = regex\nregex = ^fructosa\\.slice/job_(\\d+)$\n"
                    f"cgroup_root = {self.path(f'cgroup-{host}')}\nrescan_interval = 3600\n")
            config = (self.agent_config(port, ["JobCgroup"], interval=INTERVAL, extra=jobs)
                      .replace("host = testnode", f"host = {host}")
                      .replace(self.path("lagent-spool"), self.path(f"lagent-spool-{host}")))
            agents.append((host, self.spawn(f"lagent-{host}", [
                LAGENT, "run", "-c", self.write(f"lagent-{host}.conf", config), "-p", self.path(f"lagent-{host}.pid")])))
        wait_for(lambda: time.monotonic() - started >= duration, timeout=duration + 30, what="the job to run")
        for host, agent in agents:
            self.assertEqual(self.stop(agent), 0, read_text(self.path(f"lagent-{host}.err")))
        stop.set()
        self.assertEqual(self.stop(master), 0, read_text(self.path("lmaster.err")))

    def screenshot(self, html_path):
        """Headless Chromium's screenshot of the page, with a private profile; stopped by its
        process group's id if it hangs."""
        browser = shutil.which("chromium")
        if not browser:
            self.fail("chromium is not installed: the HTML report is checked by rendering it "
                      "(.ci/install-deps --tests installs chromium)")
        png = self.path("report.png")
        args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={self.path('chromium-profile')}",
                f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", "file://" + html_path]
        with open(self.path("chromium.err"), "w") as err:
            browser_process = subprocess.Popen(args, stdout=err, stderr=err, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
            try:
                browser_process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(browser_process.pid, signal.SIGKILL)
                browser_process.wait()
                self.fail("chromium did not exit within 90 s: " + read_text(self.path("chromium.err"))[-2000:])
        self.assertTrue(os.path.exists(png), f"no screenshot; chromium exited {browser_process.returncode}: "
                        + read_text(self.path("chromium.err"))[-2000:])
        return png

    @staticmethod
    def plot_regions(image, cell=8):
        """The plot areas: boxes of PLOT_BACKGROUND found on a grid of cell x cell squares (a line
        drawn over an area never covers a whole square, so it cannot split one)."""
        width, height = image.size
        pixels = image.load()
        columns, rows = width // cell, height // cell
        tinted = set()
        for y in range(height):
            for x in range(width):
                if pixels[x, y] == PLOT_BACKGROUND:
                    tinted.add((x // cell, y // cell))
        regions, seen = [], set()
        for start in sorted(tinted, key=lambda c: (c[1], c[0])):
            if start in seen:
                continue
            seen.add(start)
            stack, cells = [start], []
            while stack:
                cx, cy = stack.pop()
                cells.append((cx, cy))
                for next_cell in [(cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)]:
                    if next_cell in tinted and next_cell not in seen and 0 <= next_cell[0] < columns and next_cell[1] < rows:
                        seen.add(next_cell)
                        stack.append(next_cell)
            xs, ys = [c[0] for c in cells], [c[1] for c in cells]
            box = (min(xs) * cell, min(ys) * cell, (max(xs) + 1) * cell, (max(ys) + 1) * cell)
            if box[2] - box[0] >= 200 and box[3] - box[1] >= 80:
                regions.append(box)
        return regions

    def test_html_report_draws_every_plot(self):
        if Image is None:
            self.fail("python3-pil is not installed: the screenshot of the HTML report is read with PIL "
                      "(.ci/install-deps --tests installs it)")
        self.run_job()
        html_path = self.path("report.html")
        with open(html_path, "w") as out:
            result = subprocess.run([REPORT, "--data", self.path("data.h5"), "--format", "html", str(JOB)],
                                    stdout=out, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        html = read_text(html_path)

        with self.subTest(what="the document"):
            self.assertTrue(html.startswith("<!DOCTYPE html>"), html[:200])
            for outside in ["http://", "https://", "<script"]:
                self.assertNotIn(outside, html)
            self.assertEqual(html.count("<svg"), 4, html)
            for host in HOSTS:
                self.assertIn(f"{host}: cores busy", html)
                self.assertIn(f"{host}: memory (limit", html)
            self.assertRegex(html, r"1\.5 of 4 cores")
            self.assertRegex(html, r">3 of 8 cores")
            self.assertIn("limit 512 MiB", html)
            self.assertIn("limit 256 MiB", html)
            samples = [len(re.findall("[ML]", d)) for d in re.findall(r'<path class="series" d="([^"]*)"', html)]
            self.assertEqual(len(samples), 4, html)
            self.assertTrue(all(count >= SAMPLES - 15 for count in samples), f"points per plot: {samples}")

        image = Image.open(self.screenshot(html_path)).convert("RGB")
        self.assertEqual(image.size, WINDOW)
        pixels = list(image.getdata())
        with self.subTest(what="the page is not blank"):
            inked = sum(1 for p in pixels if p != (255, 255, 255))
            dark = sum(1 for p in pixels if max(p) < 100)
            self.assertGreater(inked, 0.02 * len(pixels), f"{inked} pixels not white")
            self.assertGreater(dark, 2000, f"{dark} dark (text) pixels")

        regions = self.plot_regions(image)
        self.assertEqual(len(regions), 4, f"plot areas found: {regions}")
        figures = []
        for box in regions:
            area = list(image.crop(box).getdata())
            line = sum(1 for p in area if near(p, LINE))
            limit = sum(1 for p in area if near(p, LIMIT))
            figures.append((box, line, limit))
        print("plot areas (box, line-colour pixels, limit-colour pixels):", figures)
        for box, line, limit in figures:
            # A line across the ~475 px wide area, 2.5 px thick: about a thousand pixels.
            self.assertGreaterEqual(line, 400, f"plot at {box}: {line} pixels of the line colour; all: {figures}")
        # Cores and memory side by side, per node: the memory plots (right) show the limit.
        # (A dashed line, 2 px thick, two thirds drawn: about 300 pixels.)
        with_limit = [box for box, line, limit in figures if limit >= 150]
        self.assertEqual(len(with_limit), 2, f"plots with the limit line: {figures}")
        self.assertTrue(all(box[0] > WINDOW[0] / 2 - 100 for box in with_limit), figures)


if __name__ == "__main__":
    unittest.main()
