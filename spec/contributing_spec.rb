# frozen_string_literal: true

# CONTRIBUTING.md's map of the tree names every source file: a C file or header under ext/ and a Ruby
# file under lib/ is named there by its file name (a header by its own name, or through the .c file
# of the same name in its folder).
RSpec.describe "CONTRIBUTING.md" do
  root = File.expand_path("..", __dir__)
  text = File.read(File.join(root, "CONTRIBUTING.md"))
  named = ->(name) { text.match?(/(?<![\w.-])#{Regexp.escape(name)}(?![\w-])/) }

  it "names every C file and header under ext/" do
    files = Dir.glob("ext/**/*.{c,h}", base: root).sort
    missing = files.reject do |path|
      base = File.basename(path)
      source = path.sub(/\.h\z/, ".c")
      named.call(base) || (path.end_with?(".h") && File.exist?(File.join(root, source)) &&
                           named.call(File.basename(source)))
    end
    expect(files).not_to be_empty
    expect(missing).to be_empty, "not in CONTRIBUTING.md: #{missing.join(', ')}"
  end

  it "names every Ruby file under lib/" do
    files = Dir.glob("lib/**/*.rb", base: root).sort
    missing = files.reject { |path| named.call(File.basename(path)) }
    expect(files).not_to be_empty
    expect(missing).to be_empty, "not in CONTRIBUTING.md: #{missing.join(', ')}"
  end
end
