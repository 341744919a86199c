"""How `policy-scheduler run` stops: SIGTERM/SIGINT set the stop flag once kopf is up (kopf's own
handlers would leave a task it then waits 5 s for), and the tuner's worker process is terminated
rather than waited for (the interpreter joins a process pool's workers at exit)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

from policy_scheduler.serve import stop_on_signals


def test_sigterm_sets_the_stop_flag_once_kopf_is_up_and_the_handler_goes_with_the_operator():
    async def go():
        ready, stop, stopping = asyncio.Event(), asyncio.Event(), []
        before = signal.getsignal(signal.SIGTERM)
        task = asyncio.get_running_loop().create_task(stop_on_signals(ready, stop, stopping))
        await asyncio.sleep(0.05)
        assert signal.getsignal(signal.SIGTERM) == before  # not before kopf is ready
        ready.set()
        for _ in range(100):
            if signal.getsignal(signal.SIGTERM) != before:
                break
            await asyncio.sleep(0.01)
        assert signal.getsignal(signal.SIGTERM) != before
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 1)
        assert stopping and stopping[0][0] == "SIGTERM" and stopping[0][1] >= t0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return before

    before = asyncio.run(go())
    assert signal.getsignal(signal.SIGTERM) in (before, signal.SIG_DFL)


def test_a_process_whose_tuner_worker_is_busy_exits_at_once():
    """An evaluation may run for the policy's timeLimit (60 s by default): stop() terminates the
    worker, so the interpreter's exit does not wait for it."""
    script = textwrap.dedent("""
        import asyncio, time
        from policy_scheduler.cluster.tuner import Tuner
        from policy_scheduler.idle import warm

        async def main():
            tuner = Tuner(*[None] * 8, lambda: False)
            loop = asyncio.get_running_loop()
            print(await loop.run_in_executor(tuner.executor(), warm, []), flush=True)
            busy = loop.run_in_executor(tuner.executor(), time.sleep, 30)
            await asyncio.sleep(0.2)
            await tuner.stop()
            busy.cancel()
            print(time.monotonic(), flush=True)

        asyncio.run(main())
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    end = time.monotonic()
    assert p.returncode == 0, p.stderr
    pid, stopped = p.stdout.split()
    # the interpreter still joins the terminated worker (under SCHED_IDLE it may wait for a core), but
    # not its 30 s job
    assert end - float(stopped) < 10.0, f"exited {end - float(stopped):.1f}s after the tuner stopped"
    assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]


def test_run_does_not_wait_for_a_child_process_that_lingers(tmp_path):
    """What `run` returns with once the operator stopped: at once while a child process is alive
    (the tuner's worker, terminated, may wait for a core to exit on); the logs are flushed."""
    script = textwrap.dedent("""
        import logging, multiprocessing, sys, time
        from policy_scheduler.commands.run import exit_now_if_children_linger

        if __name__ == "__main__":
            assert exit_now_if_children_linger(0) == 0  # no child: the normal way out
            logging.basicConfig(stream=sys.stderr)
            child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,))
            child.start()
            print(child.pid, flush=True)
            logging.getLogger("x").warning("the last line")
            exit_now_if_children_linger(3)
            print("not reached")
    """)
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as o, open(err, "w") as e:  # files: the child holds them too, pipes would wait for it
        p = subprocess.Popen([sys.executable, "-c", script], stdout=o, stderr=e)
        t0 = time.monotonic()
        code = p.wait(60)
        took = time.monotonic() - t0
    pid = int(out.read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    assert code == 3 and out.read_text().split() == [str(pid)], err.read_text()
    assert err.read_text().endswith("the last line\n") and took < 20
