package wecom

import (
	"regexp"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// userID is WeCom's own rule for a userid: a letter or digit first, then
// letters, digits, _ - . and @, 64 characters at most. It is one person:
// touser's "@all" (every member the application can see) and "a|b" lists
// start with or hold what no userid may, so a recipient string can never
// become a broadcast (issue 43). Departments and tags (toparty, totag)
// would be fields of their own with a permission of their own, never a
// recipient.
var userID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

// UserIDRule says the rule in words, for an error a caller reads.
const UserIDRule = "a WeCom userid: a letter or digit, then up to 63 letters, digits, _ . @ or -; one person, never @all or a list"

// ValidUserID reports whether s is one WeCom userid.
func ValidUserID(s string) bool { return userID.MatchString(s) }

// CheckUsers refuses, permanently, a message to anything but userids: the
// consumer's second look at recipients queued before the API refused them
// (or published by anything but the API).
func CheckUsers(users []string) error {
	for _, u := range users {
		// The message names no recipient: it reaches logs and statuses,
		// which show recipients masked or not at all.
		if !ValidUserID(u) {
			return &provider.Error{Provider: Name, Class: provider.Permanent, Code: "touser", Message: "the recipient is not " + UserIDRule}
		}
	}
	return nil
}
