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

package metrics

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSinceCreation(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		now  time.Time
		want float64
	}{
		{"after the creation", created.Add(90 * time.Second), 90},
		{"at the creation", created.Time, 0},
		{"a clock behind the API server's", created.Add(-3 * time.Second), 0},
	} {
		if got := SinceCreation(created, tc.now); got != tc.want {
			t.Errorf("%s: SinceCreation = %v, want %v", tc.name, got, tc.want)
		}
	}
}
