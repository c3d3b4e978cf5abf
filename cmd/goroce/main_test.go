package main

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestDocListsCommands keeps the package documentation's command list in
// step with the commands run dispatches to.
func TestDocListsCommands(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	for _, c := range commands {
		if !strings.Contains(doc, "\t"+c.name+" ") {
			t.Errorf("main.go's package documentation does not list the %q command", c.name)
		}
	}
}
