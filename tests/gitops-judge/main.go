// gitops-judge judges Kubernetes objects the way Flux and Argo CD do, with their own libraries
// rather than re-implementations, so the tests hold the operator's statuses to the real rules:
//
//   - Flux (kustomize-controller's `wait` / `healthChecks`) and kpt/kapply use kstatus:
//     sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute gives Current / InProgress / Failed /
//     Terminating and a message.
//   - Argo CD runs the health script of argocd-cm (`resource.customizations.health.<group>_<kind>`)
//     in gopher-lua (Lua 5.1). runLua below sets the interpreter up the way Argo CD does; the
//     facts come from argoproj/argo-cd util/lua/lua.go (runLuaWithResourceActionParameters,
//     ExecuteHealthLua, decodeValue), util/lua/oslib_safe.go, util/settings/settings.go
//     (the argocd-cm keys) and gitops-engine/pkg/health/health.go (GetResourceHealth), read at
//     https://github.com/argoproj/argo-cd commit 37ee0097cf851bc2dd7665fc081bbce61a7e836e
//     (2026-08-22, after v3.5.1). The code here is our own.
//
// Usage:
//
//	gitops-judge --argocd-cm deploy/argocd/argocd-cm.yaml [--notifications-cm deploy/argocd/notifications-cm.yaml] < objects.json
//	gitops-judge --flux deploy/flux/notifications.yaml [--flux ...]
//
// With --notifications-cm each judgement also lists the Argo CD Notifications triggers that fire
// for an application holding the object ("notify", see notify.go). --flux checks manifests
// against Flux's API types (flux.go) instead of judging objects.
//
// stdin is a JSON array; each element is a Kubernetes object as read from the API server, or
// null for an object that does not exist (deleted, or never created). stdout gets one JSON line
// per element, in order:
//
//	{"kind":"TpuSlice","name":"a",
//	 "kstatus":{"status":"Current","message":"Resource is Ready"},
//	 "argocd":{"status":"Healthy","message":"NodeReady: ..."},   // what Argo CD shows
//	 "lua":{"status":"Healthy","message":"NodeReady: ..."}}      // the script's own answer
//
// "argocd" differs from "lua" where Argo CD decides before (or instead of) the script: a deleting
// object is Progressing "Pending deletion" whatever the script says, an absent object is Missing,
// and a script error or an invalid status is Unknown.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/argoproj/notifications-engine/pkg/triggers"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

// verdict is one tool's answer: Argo CD's HealthStatus and kstatus' Result share this shape.
type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

type judgement struct {
	Kind    string   `json:"kind,omitempty"`
	Name    string   `json:"name,omitempty"`
	Kstatus verdict  `json:"kstatus"`
	ArgoCD  verdict  `json:"argocd"`
	Lua     *verdict `json:"lua"`
	Notify  []string `json:"notify,omitempty"`
}

// fluxFiles collects the repeated --flux flag.
type fluxFiles []string

func (f *fluxFiles) String() string     { return strings.Join(*f, ",") }
func (f *fluxFiles) Set(v string) error { *f = append(*f, v); return nil }

// healthScript is one argocd-cm customization: the Lua text and whether the full standard
// library is opened for it (`resource.customizations.useOpenLibs.<group>_<kind>`, default false).
type healthScript struct {
	lua         string
	useOpenLibs bool
}

func main() {
	cmPath := flag.String("argocd-cm", "", "argocd-cm ConfigMap (YAML) carrying resource.customizations.health.<group>_<kind> keys")
	notifyPath := flag.String("notifications-cm", "", "argocd-notifications-cm ConfigMap (YAML) whose trigger.<name> keys are evaluated per object")
	var flux fluxFiles
	flag.Var(&flux, "flux", "Flux manifests to check against Flux's API types (repeatable; no objects are judged)")
	flag.Parse()
	if len(flux) > 0 {
		for _, path := range flux {
			n, err := checkFlux(path)
			if err != nil {
				fail("%s: %v", path, err)
			}
			fmt.Printf("%s: %d Flux objects valid\n", path, n)
		}
		return
	}
	if *cmPath == "" {
		fail("--argocd-cm is required")
	}
	scripts, err := loadScripts(*cmPath)
	if err != nil {
		fail("%s: %v", *cmPath, err)
	}
	var notify triggers.Service
	var triggerNames []string
	if *notifyPath != "" {
		if notify, triggerNames, err = loadTriggers(*notifyPath); err != nil {
			fail("%s: %v", *notifyPath, err)
		}
	}

	var items []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&items); err != nil {
		fail("stdin must be a JSON array of Kubernetes objects (or null): %v", err)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for i, raw := range items {
		j, err := judge(raw, scripts)
		if err != nil {
			fail("object %d: %v", i, err)
		}
		if notify != nil {
			var u *unstructured.Unstructured
			if string(raw) != "null" {
				u = &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(raw); err != nil {
					fail("object %d: %v", i, err)
				}
			}
			if j.Notify, err = fired(notify, triggerNames, u, j.ArgoCD); err != nil {
				fail("object %d: %v", i, err)
			}
		}
		if err := enc.Encode(j); err != nil {
			fail("write: %v", err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gitops-judge: "+format+"\n", args...)
	os.Exit(2)
}

// loadScripts reads the health customizations out of argocd-cm's data. Keys are
// `resource.customizations.<type>.<group>_<kind>` (util/settings/settings.go,
// convertToOverrideKey: "<group>_<kind>" becomes "<group>/<kind>", a bare kind stays as is).
// Argo CD also accepts the nested `resource.customizations` key and wildcard group/kind patterns;
// the project uses neither.
func loadScripts(path string) (map[string]healthScript, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(text, &cm); err != nil {
		return nil, err
	}
	scripts := map[string]healthScript{}
	const prefix = "resource.customizations."
	for k, v := range cm.Data {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		kind, groupKind, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		key := overrideKey(groupKind)
		s := scripts[key]
		switch kind {
		case "health":
			s.lua = v
		case "useOpenLibs":
			b, err := parseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			s.useOpenLibs = b
		default:
			continue
		}
		scripts[key] = s
	}
	return scripts, nil
}

func overrideKey(groupKind string) string {
	if group, kind, ok := strings.Cut(groupKind, "_"); ok {
		return group + "/" + kind
	}
	return groupKind
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true":
		return true, nil
	case "0", "f", "false":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", v)
}

func judge(raw json.RawMessage, scripts map[string]healthScript) (judgement, error) {
	if string(raw) == "null" {
		// kstatus' poller reports an object the API server does not have as NotFound
		// (pkg/kstatus/polling); Argo CD marks a resource that is in Git but not live as Missing
		// (controller/health.go, setApplicationHealth: res.Live == nil).
		return judgement{
			Kstatus: verdict{Status: status.NotFoundStatus.String(), Message: "no such object"},
			ArgoCD:  verdict{Status: "Missing"},
		}, nil
	}
	// Unstructured's JSON decoding is what client-go's dynamic client and Argo CD's cluster
	// cache use: integers become int64, so generation and observedGeneration compare exactly.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return judgement{}, err
	}
	j := judgement{Kind: u.GetKind(), Name: u.GetName()}

	if res, err := status.Compute(u); err != nil {
		j.Kstatus = verdict{Status: status.UnknownStatus.String(), Error: err.Error()}
	} else {
		j.Kstatus = verdict{Status: res.Status.String(), Message: res.Message}
	}

	gvk := u.GroupVersionKind()
	key := gvk.Kind
	if gvk.Group != "" {
		key = gvk.Group + "/" + gvk.Kind
	}
	script, ok := scripts[key]
	if !ok || script.lua == "" {
		return judgement{}, fmt.Errorf("argocd-cm has no health script for %s", key)
	}
	lv := executeHealthLua(u, script)
	j.Lua = &lv
	j.ArgoCD = lv
	// gitops-engine/pkg/health/health.go GetResourceHealth: a deleting object (without Argo CD's
	// hook finalizer) is Progressing "Pending deletion" before any health script is consulted.
	if u.GetDeletionTimestamp() != nil && !slices.Contains(u.GetFinalizers(), "argocd.argoproj.io/hook-finalizer") {
		j.ArgoCD = verdict{Status: "Progressing", Message: "Pending deletion"}
	}
	return j, nil
}

// validHealth lists gitops-engine's HealthStatusCode values (isValidHealthStatusCode in
// util/lua/lua.go); anything else the script returns becomes Unknown.
var validHealth = []string{"Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing"}

// executeHealthLua follows util/lua/lua.go ExecuteHealthLua: the chunk's last value must be a
// table (or nil); it is encoded with layeh.com/gopher-json and decoded into {status, message}.
// An error becomes Unknown with the error text, as GetResourceHealth reports it.
func executeHealthLua(u *unstructured.Unstructured, script healthScript) verdict {
	hs, err := runHealthLua(u, script)
	if err != nil {
		return verdict{Status: "Unknown", Message: err.Error(), Error: err.Error()}
	}
	return hs
}

func runHealthLua(u *unstructured.Unstructured, script healthScript) (verdict, error) {
	l := lua.NewState(lua.Options{
		// argocd-cm scripts run without the standard library unless useOpenLibs is set.
		SkipOpenLibs: !script.useOpenLibs,
	})
	defer l.Close()
	// Even then Argo CD opens package, base and table, and its own "safe" os (time and date only).
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, openSafeOs},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return verdict{}, err
		}
	}
	// `local os = require("os")` gets the same safe table.
	l.PreloadModule(lua.OsLibName, safeOsLoader)
	// Argo CD gives a script one second.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, u.Object))

	fn, err := l.LoadString(script.lua)
	if err != nil {
		return verdict{}, err
	}
	l.Push(fn)
	if err := l.PCall(0, lua.MultRet, nil); err != nil {
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
			apiErr.StackTrace = "" // Argo CD strips the trace from what users see
		}
		return verdict{}, err
	}
	ret := l.Get(-1)
	switch ret.Type() {
	case lua.LTNil:
		return verdict{}, nil
	case lua.LTTable:
	default:
		return verdict{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type().String())
	}
	encoded, err := luajson.Encode(ret)
	if err != nil {
		return verdict{}, err
	}
	var hs struct {
		Status  string `json:"status,omitempty"`
		Message string `json:"message,omitempty"`
	}
	if err := json.Unmarshal(encoded, &hs); err != nil {
		// An empty table encodes as [] and counts as an empty status.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Value == "array" && typeErr.Type == reflect.TypeOf(hs) {
			return verdict{}, nil
		}
		return verdict{}, err
	}
	if !slices.Contains(validHealth, hs.Status) {
		return verdict{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return verdict{Status: hs.Status, Message: hs.Message}, nil
}

// decodeValue converts the unstructured object into Lua values as util/lua/lua.go decodeValue
// does: numbers (int64 or float64) become Lua numbers, json.Number a string, maps tables with
// string keys, slices 1-based arrays; anything else nil.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(decodeValue(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetH(lua.LString(k), decodeValue(l, item))
		}
		return t
	}
	return lua.LNil
}
