package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/gorilla/mux"
)

// What the configuration allows but an operator should fix is listed in
// /readyz's answer, which stays ready.
func TestReadyzListsWarnings(t *testing.T) {
	router := mux.NewRouter()
	warnings := []string{"the webhook is unsigned"}
	mountHealth(router, nil, warnings)
	w := httptest.NewRecorder()
	router.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var r Readiness
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || w.Code != http.StatusOK || !r.Ready || !slices.Equal(r.Warnings, warnings) {
		t.Fatalf("/readyz %d %s", w.Code, w.Body)
	}
}
