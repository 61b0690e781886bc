"""How `make test-package` shares the test files between its two pytest-xdist workers: longest first.

``--dist loadfile`` gives each worker whole files (a module fixture, such as a graded batch,
is built once), but xdist hands out the files with the most tests first and tops a worker
up while it still has two tests to run.  The files that grade with real kernels have few
tests and most of the time, so they came last and piled up on one worker: in the run of
2026-11-25 (1335 s), one worker got test_gradescope, test_grading, test_grading_solved and
test_grading_under_stress back to back while the other had finished.  Here the files known
to be long go first (the classic longest-job-first rule), and a worker gets its next file
only when it reaches the last test of the one it has, so the short files fill the gaps.
"""

import pytest

# Seconds each file took in `make test-package` on the shared 2-core machine, loaded (junit XML of
# 2026-11-25 at 21cb4d8: 2628 s of tests, 1680 s wall), for the files over ~20 s; any other file
# counts as short and keeps xdist's order (most tests first).  Only the order depends on these
# figures: a wrong one costs time, never a test.
LONG_FILES = {
    "tests/test_exercise_bank.py": 630,
    "tests/test_grading.py": 460,
    "tests/test_release.py": 265,
    "tests/test_assignment.py": 260,
    "tests/test_exercises.py": 210,
    "tests/test_grading_under_stress.py": 205,
    "tests/test_grading_solved.py": 195,
    "tests/test_gradescope.py": 185,
    "tests/test_distributed.py": 60,
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            if not getattr(self, "_longest_first", False):   # the queue is complete at the first assignment
                for name in sorted(self.workqueue, key=lambda name: (-LONG_FILES.get(name, 0),
                                                                     -len(self.workqueue[name]))):
                    self.workqueue.move_to_end(name)
                self._longest_first = True
            super()._assign_work_unit(node)

        def _reschedule(self, node):
            # xdist tops a worker up at two pending tests; one (the test it will run last, which
            # it holds until it knows the next) is enough, and keeps a long file for the other worker.
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return LongestFirst(config, log)
