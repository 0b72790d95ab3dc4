package access

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"strings"
	"testing"
)

const (
	secretA = "0123456789abcdef-secret-a"
	secretB = "0123456789abcdef-secret-b"
)

func TestPatterns(t *testing.T) {
	toks, err := New(Token{Name: "deploy-bot", Secret: secretA, Control: []string{"payments.*"}, Data: []string{"payments.*", "fraud.prod"}})
	if err != nil {
		t.Fatal(err)
	}
	id, ok := toks.Authenticate(secretA)
	if !ok || id.Name != "deploy-bot" {
		t.Fatalf("Authenticate = %+v, %v", id, ok)
	}
	for _, c := range []struct {
		ns            string
		read, control bool
	}{
		{"payments.prod", true, true},
		{"payments.prod.eu", true, true}, // '*' crosses dots: names have no '/'
		{"payments", false, false},
		{"fraud.prod", true, false},
		{"fraud.prod2", false, false},
		{"xpayments.prod", false, false},
	} {
		if id.MayRead(c.ns) != c.read || id.MayControl(c.ns) != c.control {
			t.Errorf("%s: read %v control %v, want %v %v", c.ns, id.MayRead(c.ns), id.MayControl(c.ns), c.read, c.control)
		}
	}
	if id.MayControlAll() || !id.HasControl() {
		t.Errorf("MayControlAll %v HasControl %v", id.MayControlAll(), id.HasControl())
	}
	if (Identity{}).MayRead("a") || (Identity{}).HasControl() {
		t.Error("the zero Identity may do something")
	}
	all, _ := New(Token{Name: "ops", Secret: secretA, Control: []string{"*"}})
	if id, _ := all.Authenticate(secretA); !id.MayControlAll() || !id.MayControl("any.thing") || id.MayRead("any.thing") {
		t.Errorf("ops: %+v", id)
	}
}

func TestAdminToken(t *testing.T) {
	toks, err := New(Token{Name: "root", Secret: secretA, Admin: true}, Token{Name: "b", Secret: secretB, Data: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := toks.Authenticate(secretA); !ok || !id.IsAdmin() || id.HasControl() || !id.Scopes().Admin {
		t.Errorf("root: %v %+v", ok, id)
	}
	if id, _ := toks.Authenticate(secretB); id.IsAdmin() {
		t.Errorf("b is admin: %+v", id)
	}
	if s := (Token{Name: "root", Secret: secretA, Admin: true}).String(); !strings.Contains(s, "admin") || strings.Contains(s, secretA) {
		t.Errorf("String: %s", s)
	}
}

func TestAuthenticate(t *testing.T) {
	toks, err := New(Token{Name: "a", Secret: secretA, Data: []string{"*"}}, Token{Name: "b", Secret: secretB, Data: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret, want string
	}{{secretA, "a"}, {secretB, "b"}, {"", ""}, {secretA[:10], ""}, {secretA + "x", ""}, {strings.ToUpper(secretA), ""}} {
		id, ok := toks.Authenticate(c.secret)
		if id.Name != c.want || ok != (c.want != "") {
			t.Errorf("Authenticate(%q) = %q, %v; want %q", c.secret, id.Name, ok, c.want)
		}
	}
	for _, c := range []struct {
		header, want string
	}{{"Bearer " + secretB, "b"}, {"bearer " + secretB, "b"}, {"Basic " + secretB, ""}, {secretB, ""}, {"", ""}} {
		if id, _ := toks.AuthenticateHeader(c.header); id.Name != c.want {
			t.Errorf("AuthenticateHeader(%q) = %q, want %q", c.header, id.Name, c.want)
		}
	}
	var none *Tokens
	if _, ok := none.Authenticate(secretA); ok {
		t.Error("nil Tokens authenticated")
	}
}

// TestAuthenticateIsConstantTime: Authenticate compares fixed-length
// digests with subtle.ConstantTimeCompare, with every token, and leaves
// its loop by no return or break: which token matches, and a secret's
// length, take no time of their own. (Timing itself is too noisy to
// measure in a test; the code's shape is what holds it.)
func TestAuthenticateIsConstantTime(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "access.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == "Authenticate" {
			fn = d
		}
	}
	if fn == nil {
		t.Fatal("no Authenticate")
	}
	var loops, compares, digests int
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.RangeStmt:
			loops++
			ast.Inspect(n.Body, func(m ast.Node) bool {
				switch m := m.(type) {
				case *ast.ReturnStmt:
					t.Error("a return inside the loop over the tokens")
				case *ast.BranchStmt:
					t.Errorf("a %s inside the loop over the tokens", m.Tok)
				case *ast.IfStmt:
					t.Error("a branch inside the loop over the tokens")
				}
				return true
			})
		case *ast.SelectorExpr:
			switch fmt.Sprintf("%v.%s", n.X, n.Sel.Name) {
			case "subtle.ConstantTimeCompare":
				compares++
			case "sha256.Sum256":
				digests++
			}
		}
		return true
	})
	if loops != 1 || compares != 1 || digests != 1 {
		t.Fatalf("Authenticate: %d loops, %d ConstantTimeCompare, %d Sum256; want one of each", loops, compares, digests)
	}
}

func TestNewRefuses(t *testing.T) {
	ok := Token{Name: "a", Secret: secretA, Data: []string{"*"}}
	for _, c := range []struct {
		name   string
		tokens []Token
		want   string
	}{
		{"none", nil, "no token"},
		{"no name", []Token{{Secret: secretA, Data: []string{"*"}}}, "has no name"},
		{"short", []Token{{Name: "a", Secret: "short-one", Data: []string{"*"}}}, "its secret has 9 bytes"},
		{"space", []Token{{Name: "a", Secret: "0123456789 abcdefgh", Data: []string{"*"}}}, "a header cannot carry"},
		{"no scope", []Token{{Name: "a", Secret: secretA}}, "neither control nor data"},
		{"bad pattern", []Token{{Name: "a", Secret: secretA, Data: []string{"pay[ments"}}}, `pattern "pay[ments"`},
		{"empty pattern", []Token{{Name: "a", Secret: secretA, Control: []string{""}}}, `pattern ""`},
		{"same name", []Token{ok, {Name: "a", Secret: secretB, Data: []string{"*"}}}, `"a" given twice`},
		{"same secret", []Token{ok, {Name: "b", Secret: secretA, Data: []string{"*"}}}, `tokens "a" and "b" have the same secret`},
	} {
		_, err := New(c.tokens...)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.name, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), secretA) || strings.Contains(err.Error(), "short-one") || strings.Contains(err.Error(), "0123456789 abc")) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
}

func TestNoSecretPrinted(t *testing.T) {
	tok := Token{Name: "deploy-bot", Secret: secretA, Control: []string{"payments.*"}}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("token", "t", tok)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("token", "t", tok)
	toks, _ := New(tok)
	id, _ := toks.Authenticate(secretA)
	log.Info("identity", "id", id, "tokens", toks)
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%+v %#v %s %v", tok, tok, tok, []Token{tok}), fmt.Sprintf("%+v %#v", id, toks), buf.String()} {
		if strings.Contains(s, secretA) {
			t.Errorf("the secret is printed: %s", s)
		}
		if !strings.Contains(s, "deploy-bot") && !strings.Contains(s, "0x") {
			t.Errorf("the name is not printed: %s", s)
		}
	}
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("an identity in the background context")
	}
	toks, _ := New(Token{Name: "a", Secret: secretA, Data: []string{"*"}})
	id, _ := toks.Authenticate(secretA)
	got, ok := FromContext(NewContext(context.Background(), id))
	if !ok || got.Name != "a" || !got.MayRead("x") {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}
}
