//go:build linux

package rdmacm_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart keeps the README's Go quick start the body of
// Example_quickStart, which go test compiles and runs.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Skipf("no README beside the package: %v", err)
	}
	src, err := os.ReadFile("example_quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	const open = "func Example_quickStart() {\n"
	i, j := strings.Index(s, open), strings.Index(s, "\t// Output:")
	if i < 0 || j < i {
		t.Fatal("Example_quickStart not found")
	}
	var body []string
	for _, l := range strings.Split(strings.TrimRight(s[i+len(open):j], "\n"), "\n") {
		body = append(body, strings.TrimPrefix(l, "\t"))
	}
	want := "```go\n" + strings.Join(body, "\n") + "\n```"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md's quick start is not Example_quickStart's body; it should read:\n%s", want)
	}
}
