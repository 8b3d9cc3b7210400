package testenv

// QueueType is the queue type the suite runs with: TEST_QUEUE_TYPE
// (classic, the default, or quorum), for the programs' QUEUE_TYPE, so that
// one test runs on whatever broker and type the test matrix picks.
func QueueType() string { return env("TEST_QUEUE_TYPE", "classic") }
