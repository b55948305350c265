package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// pathCache remembers the resolved node chain of recently seen request
// paths, so that the grant hot path does not look up every level of every
// request in nodeIdx (a map keyed by strings). It is a derived index, never
// part of a snapshot, and invisible in the output: a hit returns exactly
// what resolving the path again would (the nodes exist and the config has
// not changed), and a miss resolves it the slow way.
//
// It is a set-associative table of pathCacheSets×pathCacheWays entries: a
// path goes to the set of its hash and replaces one way of it on a miss, so
// the memory is bounded whatever the number of distinct paths. Entries are
// verified string by string, so a hash collision costs a miss, never a
// wrong path.
type pathCache struct {
	e [pathCacheSets * pathCacheWays]pathEntry
}

const (
	pathCacheSets = 512
	pathCacheWays = 4
)

// pathEntry is one resolved path: the scope state index, the request path
// exactly as given (its strings shared with the event that filled it) and
// the resulting node chain (scope root first).
type pathEntry struct {
	hash  uint64 // 0: empty
	scope int32
	np    uint8
	nodes [maxPath]int32
	path  []schemas.PathLevel
}

// pathKey makes the cache key of a path from the scope state index and the
// path hash that fingerprint computes; it is never 0 (0 marks an empty
// entry).
func pathKey(si int32, pathHash uint64) uint64 {
	return fnvInt(pathHash, int64(si)) | 1
}

// lookup returns the cached node chain of (si, path), if any.
func (pc *pathCache) lookup(h uint64, si int32, path []schemas.PathLevel) (*pathEntry, bool) {
	set := pc.e[(h%pathCacheSets)*pathCacheWays:][:pathCacheWays]
	for w := range set {
		e := &set[w]
		if e.hash != h || e.scope != si || len(e.path) != len(path) {
			continue
		}
		same := true
		for i := range path {
			if e.path[i].Level != path[i].Level || e.path[i].ID != path[i].ID {
				same = false
				break
			}
		}
		if same {
			return e, true
		}
	}
	return nil, false
}

// store remembers a resolved path. It copies the path's level and id
// headers (the strings themselves are shared, never modified).
func (pc *pathCache) store(h uint64, si int32, path []schemas.PathLevel, nodes *[maxPath]int32, np int) {
	set := pc.e[(h%pathCacheSets)*pathCacheWays:][:pathCacheWays]
	w := int((h >> 32) % pathCacheWays)
	for i := range set {
		if set[i].hash == 0 {
			w = i
			break
		}
	}
	e := &set[w]
	e.hash, e.scope, e.np, e.nodes = h, si, uint8(np), *nodes
	e.path = append(e.path[:0], path...)
}
