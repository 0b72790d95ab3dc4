package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type (
	shadowNode struct {
		D    time.Duration
		Next *shadowNode // within itself: its durations read numbers only
	}
	shadowInner   struct{ D time.Duration }
	shadowEmbedsP struct{ *shadowInner }
	shadowMixed   struct {
		time.Duration                             // a field named Duration
		Skip          time.Duration               `json:"-"`
		Quoted        time.Duration               `json:"q,string"`
		List          []time.Duration             `json:"list"`
		Fixed         [2]time.Duration            `json:"fixed"`
		ByName        map[string]*time.Duration   `json:"by_name"`
		Named         shadowInner                 `json:"named"`
		Nested        map[string][]shadowInner    `json:"nested"`
		Plain         map[string]json.RawMessage  `json:"plain"`
		Iface         any                         `json:"iface"`
		Ptrs          []*shadowInner              `json:"ptrs"`
		Deep          map[string]map[string]int64 `json:"deep"`
	}
)

// The shadow decodes what encoding/json decodes once every duration
// string is its nanoseconds, for every kind of place a time.Duration can
// sit.
func TestShadowDecodesAsEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name        string
		typ         reflect.Type
		text, nanos string
	}{
		{"mixed", reflect.TypeFor[shadowMixed](),
			`{"Duration":"1s","Skip":"2s","q":"3s","list":["4s",5],"fixed":["6s",7],"by_name":{"a":"8s","b":null},` +
				`"named":{"D":"9s"},"nested":{"x":[{"D":"10s"}]},"plain":{"k":"1s"},"iface":"2s","ptrs":[{"d":"11s"},null],"deep":{"a":{"b":1}}}`,
			`{"Duration":1000000000,"Skip":"2s","q":"3000000000","list":[4000000000,5],"fixed":[6000000000,7],"by_name":{"a":8000000000,"b":null},` +
				`"named":{"D":9000000000},"nested":{"x":[{"D":10000000000}]},"plain":{"k":"1s"},"iface":"2s","ptrs":[{"d":11000000000},null],"deep":{"a":{"b":1}}}`},
		{"recursive", reflect.TypeFor[shadowNode](), `{"D":"1s","Next":{"D":2}}`, `{"D":1000000000,"Next":{"D":2}}`},
		{"null", reflect.TypeFor[shadowNode](), `null`, `null`},
		{"slice", reflect.TypeFor[[]time.Duration](), `["1ms",2]`, `[1000000,2]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := newShadow(tc.typ)
			if sh == nil {
				t.Fatal("no shadow")
			}
			got, want := reflect.New(tc.typ), reflect.New(tc.typ)
			if err := json.Unmarshal([]byte(tc.nanos), want.Interface()); err != nil {
				t.Fatal(err)
			}
			if err := sh.decode([]byte(tc.text), got.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), want.Elem().Interface()) {
				t.Errorf("decoded %+v, want %+v", got.Elem(), want.Elem())
			}
		})
	}
}

// What encoding/json refuses, the shadow refuses: a string that is no
// duration, a fraction of a nanosecond, and an embedded pointer to an
// unexported struct that it would have to allocate.
func TestShadowRefusesAsEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		text string
	}{
		{reflect.TypeFor[shadowInner](), `{"D":"soon"}`},
		{reflect.TypeFor[shadowInner](), `{"D":1.5}`},
		{reflect.TypeFor[shadowInner](), `{"D":true}`},
		{reflect.TypeFor[shadowEmbedsP](), `{"D":"1s"}`},
	} {
		if err := json.Unmarshal([]byte(strings.ReplaceAll(tc.text, `"1s"`, "1000000000")), reflect.New(tc.typ).Interface()); err == nil {
			t.Fatalf("%v %s: encoding/json accepts it", tc.typ, tc.text)
		}
		if err := newShadow(tc.typ).decode([]byte(tc.text), reflect.New(tc.typ).Interface()); err == nil {
			t.Errorf("%v %s: decoded, want an error as encoding/json's", tc.typ, tc.text)
		}
	}
}

func TestNoShadowWithoutDurations(t *testing.T) {
	type plain struct {
		A int
		B map[string]string
	}
	if sh := newShadow(reflect.TypeFor[plain]()); sh != nil {
		t.Errorf("a shadow of a type without durations: %v", sh.s)
	}
}

// An error names the field as encoding/json would, from T.
func TestShadowErrorNamesTheField(t *testing.T) {
	type conf struct {
		Port  int
		Inner shadowInner
	}
	err := newShadow(reflect.TypeFor[conf]()).decode([]byte(`{"Inner":{"D":"1s"},"Port":"eighty"}`), new(conf))
	if err == nil || !strings.Contains(err.Error(), "conf.Port") {
		t.Errorf("error %v, want it to name conf.Port", err)
	}
}
