package doccheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"sort"
)

// AnyInAPI checks the other API rule of STYLE.md ("no any where a type
// parameter fits") on the exported surface of one package directory: it
// reports every exported function, method, type or exported struct field
// whose type mentions any or interface{} outside a type-parameter
// constraint. Code inside function bodies is not part of the API and is
// not looked at (a JSON validator walking decoded values needs any).
func AnyInAPI(dir string) ([]Problem, error) {
	files, err := parseDir(token.NewFileSet(), dir)
	if err != nil {
		return nil, err
	}
	var out []Problem
	report := func(name string, n ast.Node) {
		if mentionsAny(n) {
			out = append(out, Problem{dir, name, "uses any in its exported signature"})
		}
	}
	for _, f := range files {
		{
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					report(d.Name.Name, d.Type.Params)
					if d.Type.Results != nil {
						report(d.Name.Name, d.Type.Results)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						ts, ok := s.(*ast.TypeSpec)
						if !ok || !ts.Name.IsExported() {
							continue
						}
						switch t := ts.Type.(type) {
						case *ast.StructType:
							for _, f := range t.Fields.List {
								for _, n := range f.Names {
									if n.IsExported() {
										report(ts.Name.Name+"."+n.Name, f.Type)
									}
								}
							}
						case *ast.InterfaceType:
							for _, m := range t.Methods.List {
								if len(m.Names) > 0 && m.Names[0].IsExported() {
									report(ts.Name.Name+"."+m.Names[0].Name, m.Type)
								}
							}
						default:
							report(ts.Name.Name, ts.Type)
						}
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func exportedRecv(fl *ast.FieldList) bool {
	t := fl.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			panic(fmt.Sprintf("doccheck: receiver %T", t))
		}
	}
}

// mentionsAny reports whether n's types mention any or interface{}.
// Type-parameter lists are not visited: there any is a constraint.
func mentionsAny(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.Ident:
			if x.Name == "any" {
				found = true
			}
		case *ast.InterfaceType:
			if len(x.Methods.List) == 0 {
				found = true
			}
		case *ast.FuncType:
			// Visit parameters and results only, never TypeParams.
			if x.Params != nil && mentionsAny(x.Params) || x.Results != nil && mentionsAny(x.Results) {
				found = true
			}
			return false
		}
		return !found
	})
	return found
}
