package mail

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"os"
	"strings"

	gomail "github.com/wneessen/go-mail"
)

// DKIM signs every mail (RFC 6376) with go-mail's own signer: relaxed
// canonicalization of header and body, rsa-sha256 or ed25519-sha256
// (RFC 8463) by the key's type.
type DKIM struct {
	Domain   string        // d=, DKIM_DOMAIN
	Selector string        // s=, DKIM_SELECTOR: the key is at <s>._domainkey.<d>
	Key      crypto.Signer // *rsa.PrivateKey or ed25519.PrivateKey
}

// dkimHeaders are the headers every signature covers. A header listed and
// absent (List-Unsubscribe on a code) is signed as absent, so nobody on
// the way can add one without breaking the signature.
//
// The list must fit on one folded line of the DKIM-Signature header
// (h=…; at most maxTagLine bytes): go-mail v0.8.1 hard-wraps a longer tag
// in the middle of a header name, and relaxed canonicalization reads the
// fold as a space the signer did not hash, so no verifier would accept
// the signature (TestDKIMSignatureVerifies catches it). That is why
// MIME-Version and Content-Type are not on it; the body hash covers the
// body either way.
var dkimHeaders = []string{
	"From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe", "List-Unsubscribe-Post",
}

// maxTagLine is the longest "tag=value; " go-mail keeps on one folded
// line of DKIM-Signature (its 76-byte lines, less the leading blank).
const maxTagLine = 75

// minRSABits is RFC 8301's floor for an RSA signing key.
const minRSABits = 1024

// LoadDKIMKey reads a PEM private key for DKIM (PKCS#1 RSA, or PKCS#8 RSA
// or Ed25519), refusing one that cannot sign DKIM.
func LoadDKIMKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path) //nolint:gosec // DKIM_PRIVATE_KEY_FILE: the operator names the file
	if err != nil {
		return nil, err
	}
	k, err := gomail.PrivKeyFromPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkDKIMKey(k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

func checkDKIMKey(k crypto.Signer) error {
	switch k := k.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("an RSA key of %d bits: DKIM needs at least %d (2048 recommended)", k.N.BitLen(), minRSABits)
		}
		return nil
	case ed25519.PrivateKey:
		return nil
	case nil:
		return errors.New("no key")
	}
	return fmt.Errorf("a %T key: DKIM signs with RSA or Ed25519", k)
}

// Validate reports what is wrong with d.
func (d *DKIM) Validate() error {
	switch {
	case d.Domain == "" || strings.ContainsAny(d.Domain, " \t\r\n;=") || !strings.Contains(d.Domain, "."):
		return errors.New("the domain must be a domain name")
	case d.Selector == "" || strings.ContainsAny(d.Selector, " \t\r\n;="):
		return errors.New("the selector must be a name")
	case len("d="+d.Domain+"; ") > maxTagLine || len("s="+d.Selector+"; ") > maxTagLine:
		// Folded mid-name, as the header list would be (see dkimHeaders).
		return fmt.Errorf("the domain and the selector must be at most %d bytes each", maxTagLine-4)
	}
	return checkDKIMKey(d.Key)
}

// signer returns a signer of its own for one message: go-mail's signer
// notes the key's algorithm on itself at its first signature, so one
// shared by concurrent sends would race.
func (d *DKIM) signer() *gomail.DKIMSigner {
	s := gomail.NewDKIMSigner(d.Domain, d.Selector, d.Key)
	s.SignHeaders(dkimHeaders...)
	return s
}
