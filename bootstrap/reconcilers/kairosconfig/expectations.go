/*
Copyright 2026 The Cozystack Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package kairosconfig

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/cluster-api-workers/internal/ownwrites"
)

// expectations remember the controller's own writes until the cache shows
// them: the versions of a config our writes replaced (ownwrites), and the
// token record we ended or deleted, so that a reconcile on a stale cache
// neither adds the finalizer again, renders again nor revokes again. Each entry
// lives from a write to the next reconcile of the same config, which the
// write's own watch event triggers.
type expectations struct {
	*ownwrites.Versions
	// ended holds, per config, the ID of the token whose record we ended
	// or deleted: a cached record with that ID is already ended or gone.
	ended ownwrites.Children
	// endedWhy holds why, per config with an entry in ended: "" for a
	// deleted record.
	endedWhy sync.Map
}

func newExpectations() *expectations {
	return &expectations{Versions: ownwrites.New()}
}

// endedToken records that the record of token id was ended (why) or
// deleted (why "").
func (e *expectations) endedToken(config types.NamespacedName, id string, why tokenEnded) {
	e.ended.Wrote(config, id)
	e.endedWhy.Store(config, why)
}

// tokenRevoked reports whether a cached record of token id was already
// ended or deleted by us.
func (e *expectations) tokenRevoked(config types.NamespacedName, id string) bool {
	return e.ended.Pending(config, id)
}

// endedAs is why the config's record was ended by us, "" when it was
// deleted or nothing is expected.
func (e *expectations) endedAs(config types.NamespacedName) tokenEnded {
	why, _ := e.endedWhy.Load(config)
	w, _ := why.(tokenEnded)
	return w
}

// tokenRecordGone drops the expectation once the cache shows the record
// ended or gone.
func (e *expectations) tokenRecordGone(config types.NamespacedName) {
	e.ended.Seen(config)
	e.endedWhy.Delete(config)
}

// forget drops everything about a config that is gone.
func (e *expectations) forget(config types.NamespacedName) {
	e.Forget(config)
	e.tokenRecordGone(config)
}
