package logging

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// No field anywhere in the code is named like a key every line has, and
// no log call or field list names a key twice (issue 38: the API's
// request lines carried "caller" twice). Unique would rename such a key
// in a line; this finds the code that would make it. A logger's With
// fields repeated per line are not visible here: the end-to-end log test
// decodes every line of a run with a decoder that refuses duplicates.
func TestNoFieldKeyIsWrittenTwice(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var problems []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var args []ast.Expr
			switch x := n.(type) {
			case *ast.CallExpr:
				if key, ok := fieldKey(x); ok && slices.Contains(reservedKeys, key) {
					problems = append(problems, fset.Position(x.Pos()).String()+": field "+strconv.Quote(key)+" is a key zap writes on every line")
				}
				args = x.Args
			case *ast.CompositeLit:
				args = x.Elts
			default:
				return true
			}
			seen := map[string]bool{}
			for _, a := range args {
				if c, ok := a.(*ast.CallExpr); ok {
					if key, ok := fieldKey(c); ok {
						if seen[key] {
							problems = append(problems, fset.Position(c.Pos()).String()+": field "+strconv.Quote(key)+" twice in one line")
						}
						seen[key] = true
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, files, "the walk found the code")
	require.Empty(t, problems)
}

// fieldKey is the key of a zap field constructor called with a literal
// key, such as zap.String("route", r).
func fieldKey(c *ast.CallExpr) (string, bool) {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || len(c.Args) == 0 {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "zap" {
		return "", false
	}
	lit, ok := c.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	key, err := strconv.Unquote(lit.Value)
	return key, err == nil
}
