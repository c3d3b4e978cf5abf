package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"time"
)

// maxPinglist bounds the pinglist file the agent reads (a 10,000-node list
// is about 600 KiB).
const maxPinglist = 64 << 20

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent: pinglist: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPinglist+1))
	if err != nil {
		return nil, fmt.Errorf("agent: pinglist: %w", err)
	}
	if len(b) > maxPinglist {
		return nil, fmt.Errorf("agent: pinglist %s: larger than %d bytes", path, maxPinglist)
	}
	return b, nil
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// fileStamp is what the watcher compares between two checks without
// reading the file.
type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path) // follows symbolic links (a ConfigMap's ..data swap)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

// watchRehash is how many intervals pass before the watcher reads and
// hashes the file even when its modification time and size look the same
// (a same-size rewrite within the file system's timestamp granularity).
const watchRehash = 10

// watch polls the pinglist file every WatchInterval until ctx ends and
// reloads it when its content changed: when its modification time or size
// changed, and every watchRehash intervals regardless, it reads the file
// and compares its SHA-256 with the installed one's. Polling, rather than
// inotify, sees every way a file is replaced: edited in place, renamed
// over, or a Kubernetes ConfigMap volume's atomic symlink swap, which an
// inotify watch on the file itself misses. A file that does not parse is
// reported (and counted) once per distinct content, and the old pinglist
// stays.
func (a *Agent) watch(ctx context.Context) {
	if a.opts.WatchInterval < 0 {
		return
	}
	t := time.NewTicker(a.opts.WatchInterval)
	defer t.Stop()
	last := stamp(a.opts.Pinglist)
	var bad [32]byte
	haveBad := false
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := stamp(a.opts.Pinglist)
		if st == last && i%watchRehash != 0 {
			continue
		}
		last = st
		b, err := readFile(a.opts.Pinglist)
		if err != nil {
			if !haveBad || bad != ([32]byte{}) {
				a.reloadErrors.Inc()
				a.log.Error("pinglist unreadable; keeping the current pinglist", "err", err)
				bad, haveBad = [32]byte{}, true
			}
			continue
		}
		h := sum(b)
		if h == a.cfg.Load().hash || haveBad && h == bad {
			continue
		}
		if err := a.reloadBytes(b); err != nil {
			bad, haveBad = h, true
			continue
		}
		haveBad = false
	}
}
