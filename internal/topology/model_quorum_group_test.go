package topology

import "testing"

func TestQuorumInitialGroupSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		want any
	}{
		{"unset leaves it to the broker", 0, nil},
		{"set on every queue", 3, int64(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.QueueType = Quorum
			cfg.QuorumInitialGroupSize = tc.size
			m, err := Build(cfg, "3.10.8")
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range m.Queues {
				if q.Role == RoleDeadLetterLog {
					continue // classic on purpose
				}
				if got := q.Args[ArgQuorumInitialGroup]; got != tc.want {
					t.Fatalf("%s: %s = %v, want %v", q.Name, ArgQuorumInitialGroup, got, tc.want)
				}
			}
		})
	}
}
