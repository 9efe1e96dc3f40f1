package main

// The "safe" os library Argo CD gives health scripts (argoproj/argo-cd util/lua/oslib_safe.go):
// only os.time and os.date, so a script cannot exit, run programs or touch files. The project's
// health.lua uses neither; they are here so a script that does is judged as Argo CD would run it.

import (
	"fmt"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

var safeOsFuncs = map[string]lua.LGFunction{
	"time": osTime,
	"date": osDate,
}

// openSafeOs registers the table as the global `os`.
func openSafeOs(l *lua.LState) int {
	l.Push(l.RegisterModule(lua.OsLibName, safeOsFuncs))
	return 1
}

// safeOsLoader answers `require("os")`.
func safeOsLoader(l *lua.LState) int {
	l.Push(l.SetFuncs(l.NewTable(), safeOsFuncs))
	return 1
}

// osTime: os.time() is now in Unix seconds; os.time{year=, month=, day=, hour=12, min=0, sec=0}
// the given local time.
func osTime(l *lua.LState) int {
	if l.GetTop() == 0 {
		l.Push(lua.LNumber(time.Now().Unix()))
		return 1
	}
	t := l.CheckTable(1)
	field := func(name string, def int) int {
		if n, ok := t.RawGetString(name).(lua.LNumber); ok {
			return int(n)
		}
		return def
	}
	at := time.Date(field("year", -1), time.Month(field("month", -1)), field("day", -1),
		field("hour", 12), field("min", 0), field("sec", 0), 0, time.Local)
	l.Push(lua.LNumber(at.Unix()))
	return 1
}

// osDate: os.date([format [, time]]); a leading "!" means UTC, "*t" returns a table, otherwise a
// strftime subset.
func osDate(l *lua.LState) int {
	format := "%c"
	if l.GetTop() >= 1 {
		format = l.CheckString(1)
	}
	at := time.Now()
	if l.GetTop() >= 2 {
		at = time.Unix(int64(l.CheckNumber(2)), 0)
	}
	if rest, ok := strings.CutPrefix(format, "!"); ok {
		format = rest
		at = at.UTC()
	} else {
		at = at.Local()
	}
	if strings.HasPrefix(format, "*t") {
		t := l.NewTable()
		t.RawSetString("year", lua.LNumber(at.Year()))
		t.RawSetString("month", lua.LNumber(at.Month()))
		t.RawSetString("day", lua.LNumber(at.Day()))
		t.RawSetString("hour", lua.LNumber(at.Hour()))
		t.RawSetString("min", lua.LNumber(at.Minute()))
		t.RawSetString("sec", lua.LNumber(at.Second()))
		t.RawSetString("wday", lua.LNumber(int(at.Weekday())+1))
		t.RawSetString("yday", lua.LNumber(at.YearDay()))
		t.RawSetString("isdst", lua.LFalse)
		l.Push(t)
		return 1
	}
	l.Push(lua.LString(strftime(format, at)))
	return 1
}

func strftime(format string, at time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", at.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", at.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(at.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", at.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", at.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", at.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", at.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", at.YearDay())
		case 'a':
			b.WriteString(at.Format("Mon"))
		case 'A':
			b.WriteString(at.Format("Monday"))
		case 'b':
			b.WriteString(at.Format("Jan"))
		case 'B':
			b.WriteString(at.Format("January"))
		case 'p':
			b.WriteString(at.Format("PM"))
		case 'c':
			b.WriteString(at.Format("Mon Jan  2 15:04:05 2006"))
		case 'x':
			b.WriteString(at.Format("01/02/06"))
		case 'X':
			b.WriteString(at.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
