module github.com/goroce/goroce

go 1.26
