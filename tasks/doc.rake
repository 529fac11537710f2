# frozen_string_literal: true

README_SUMMARY = /(<!-- summary: begin -->\n).*?(<!-- summary: end -->)/m.freeze

namespace :doc do
  desc "From a real run of the demo: README's --summary block and doc/report.png (the report's first " \
       "screen in headless Chromium, 1400x900)"
  task refresh: :demo do
    require "open3"
    require "tmpdir"
    require_relative "../spec/support/browser"
    summary, err, status = Open3.capture3(RbConfig.ruby, "-Ilib", "exe/ptmalloc-visualize", "--summary",
                                          "tmp/demo/demo.dump")
    abort "ptmalloc-visualize --summary failed: #{err}" unless status.success?
    readme = File.read("README.md")
    abort "README.md has no summary markers" unless readme.match?(README_SUMMARY)
    block = "```\n#{summary}```\n"
    File.write("README.md", readme.sub(README_SUMMARY) { "#{Regexp.last_match(1)}#{block}#{Regexp.last_match(2)}" })
    abort "rake doc:refresh: Chromium and chromedriver are needed (bin/setup installs them)" unless Browser.available?
    Dir.mktmpdir("ptmd-doc") do |profile|
      Browser.open(profile) do |browser|
        browser.viewport(1400, 900)
        browser.visit("file://#{File.expand_path('tmp/demo/report/index.html')}")
        browser.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
        browser.script("window.scrollTo(0, 0)")
        File.binwrite("doc/report.png", browser.screenshot)
      end
    end
    puts "README.md's summary and doc/report.png are from tmp/demo/demo.dump"
  end
end
