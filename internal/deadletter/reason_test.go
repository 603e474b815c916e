package deadletter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// Reasons lists every Reason constant of reason.go, once.
func TestReasonsListsEveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "reason.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				declared = append(declared, n.Name)
			}
		}
	}
	listed := map[Reason]bool{}
	for _, r := range Reasons() {
		if listed[r] {
			t.Errorf("Reasons lists %q twice", r)
		}
		listed[r] = true
	}
	if len(listed) != len(declared) {
		slices.Sort(declared)
		t.Fatalf("Reasons lists %d reasons, reason.go declares %d: %v", len(listed), len(declared), declared)
	}
}
