package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// version is a broker's major.minor; the zero value means "newest".
type version struct{ major, minor int }

func parseVersion(s string) (version, error) {
	if s == "" {
		return version{}, nil
	}
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return version{}, fmt.Errorf("broker version %q: want major.minor[.patch]", s)
	}
	maj, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return version{}, fmt.Errorf("broker version %q: want major.minor[.patch]", s)
	}
	return version{maj, minor}, nil
}

// less reports whether v is older than major.minor. Unknown (zero) is newest.
func (v version) less(major, minor int) bool {
	if v.major == 0 {
		return false
	}
	return v.major < major || (v.major == major && v.minor < minor)
}
