// Fault-injection points for tests (tests/cli/test_checkpoint_kill.sh): compiled in, inert unless
// the environment asks. Writers call ds_test_point() between the steps of a multi-file write (after
// each file, before and after each rename), so a test can stop a process at an exact step.
//   DSPARK_TEST_KILL_AT_POINT=N      the N-th point reached (1-based, counted per process) raises SIGKILL
//   DSPARK_TEST_POINT_DELAY_US=U     every point sleeps U microseconds first (for kills from outside)
// Neither is read in normal use beyond one getenv at the first point.
#ifndef DS_BASE_TESTPOINT_H
#define DS_BASE_TESTPOINT_H

void ds_test_point(void);

#endif
