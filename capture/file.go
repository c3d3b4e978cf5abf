package capture

import (
	"fmt"
	"io"
	"os"
)

// DumpFile is Dump of the pcap or pcapng file called name, or of stdin
// when name is "-" (as `goroce decode FILE` reads it). An error opening
// the file is returned as os.Open gives it; errors reading or writing
// are prefixed with the file's name ("standard input" for "-").
func DumpFile(w io.Writer, name string, stdin io.Reader, opt Options) (Totals, error) {
	in := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return Totals{}, err
		}
		defer f.Close()
		in = f
	} else {
		name = "standard input"
	}
	r, err := NewReader(in)
	if err != nil {
		return Totals{}, fmt.Errorf("%s: %w", name, err)
	}
	tot, err := Dump(w, r, opt)
	if err != nil {
		return tot, fmt.Errorf("%s: %w", name, err)
	}
	return tot, nil
}
