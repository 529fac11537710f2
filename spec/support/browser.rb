# frozen_string_literal: true

require "json"
require "net/http"
require "socket"

# A minimal WebDriver client (chromedriver + Debian's chromium, headless) over Net::HTTP: enough to
# open a page, run a script, read the console log, take a screenshot, and move, click and type as a
# person does (W3C actions: the page sees real pointer and key events).
class Browser
  CHROMIUM = ENV.fetch("CHROMIUM", "/usr/bin/chromium")
  CHROMEDRIVER = ENV.fetch("CHROMEDRIVER", "/usr/bin/chromedriver")

  def self.available?
    File.executable?(CHROMIUM) && File.executable?(CHROMEDRIVER)
  end

  def self.open(profile_dir)
    browser = new(profile_dir)
    yield browser
  ensure
    browser&.close
  end

  # Renders the dump at dump_path into dir/report with ptmalloc-visualize and opens its page at
  # 1400x900, the explorer ready; the caller closes the browser.
  def self.explorer(dir, dump_path)
    report = File.join(dir, "report")
    _o, err, status = Open3.capture3(RbConfig.ruby, "-I", SpecHelpers::LIB, SpecHelpers::VISUALIZE, dump_path, report)
    raise "rendering failed: #{err}" unless status.success?

    browser = new(File.join(dir, "chrome-profile"))
    browser.viewport(1400, 900)
    browser.visit("file://#{File.join(report, 'index.html')}")
    browser.wait_for("return window.ptmdExplorer && window.ptmdExplorer.ready")
    browser
  end

  def initialize(profile_dir)
    @port = TCPServer.open("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    @driver = Process.spawn(CHROMEDRIVER, "--port=#{@port}", "--allowed-ips=127.0.0.1", %i[out err] => File::NULL)
    wait_ready
    caps = {
      browserName: "chrome",
      "goog:chromeOptions" => {
        binary: CHROMIUM,
        args: %W[--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking
                 --disable-component-update --disable-sync --no-first-run --disable-quic --user-data-dir=#{profile_dir}
                 --window-size=1400,1000]
      },
      "goog:loggingPrefs" => { browser: "ALL" }
    }
    @session = request(:post, "/session", capabilities: { alwaysMatch: caps })["sessionId"]
  end

  def visit(url)
    command(:post, "url", url: url)
  end

  # Runs JavaScript in the page and returns its result.
  def script(source)
    command(:post, "execute/sync", script: source, args: [])
  end

  # Runs JavaScript until it returns something truthy (or raises after timeout seconds).
  def wait_for(source, timeout: 30)
    deadline = Time.now + timeout
    loop do
      value = script(source)
      return value if value
      raise "timed out waiting for: #{source}" if Time.now > deadline

      sleep 0.05
    end
  end

  # Sets the size of the window's viewport (CSS pixels), whatever the browser's frame adds.
  def viewport(width, height)
    command(:post, "window/rect", width: width, height: height)
    dw, dh = script("return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]")
    command(:post, "window/rect", width: width + dw, height: height + dh)
  end

  # @return [String] the WebDriver id of the first element matching a CSS selector
  def element(css)
    command(:post, "element", using: "css selector", value: css).values.first
  end

  # Moves the real pointer to viewport coordinates (integers, CSS pixels).
  def move_to(x, y)
    pointer([{ type: "pointerMove", duration: 0, origin: "viewport", x: x, y: y }])
  end

  # Moves the pointer there and clicks the left button.
  def click_at(x, y)
    pointer([{ type: "pointerMove", duration: 0, origin: "viewport", x: x, y: y },
             { type: "pointerDown", button: 0 }, { type: "pointerUp", button: 0 }])
  end

  # Presses the left button at one point, moves to another and releases it there.
  def drag(x0, y0, x1, y1)
    pointer([{ type: "pointerMove", duration: 0, origin: "viewport", x: x0, y: y0 }, { type: "pointerDown", button: 0 },
             { type: "pointerMove", duration: 50, origin: "viewport", x: x1, y: y1 }, { type: "pointerUp", button: 0 }])
  end

  # Turns the mouse wheel over a point (negative dy: away from the user, up).
  def wheel_at(x, y, dy)
    command(:post, "actions", actions: [{ type: "wheel", id: "wheel", actions: [{ type: "scroll", x: x, y: y, deltaX: 0, deltaY: dy, duration: 0, origin: "viewport" }] }])
    command(:delete, "actions")
  end

  # Presses and releases keys (WebDriver key values, e.g. "\uE015" for the down arrow) in the focused element.
  def keys(*values)
    actions = values.flat_map { |v| [{ type: "keyDown", value: v }, { type: "keyUp", value: v }] }
    command(:post, "actions", actions: [{ type: "key", id: "keyboard", actions: actions }])
    command(:delete, "actions")
  end

  # Clears an input and types text into it, key by key.
  def type(css, text)
    id = element(css)
    command(:post, "element/#{id}/clear", {})
    command(:post, "element/#{id}/value", text: text)
  end

  # Clicks an element (WebDriver's element click: scrolled into view, at its centre).
  def click(css)
    command(:post, "element/#{element(css)}/click", {})
  end

  # @return [Array<Hash>] console entries (level, message)
  def console
    command(:post, "se/log", type: "browser")
  end

  # @return [String] PNG bytes
  def screenshot
    command(:get, "screenshot").unpack1("m")
  end

  def close
    request(:delete, "/session/#{@session}") if @session
  rescue StandardError
    nil
  ensure
    if @driver
      Process.kill("TERM", @driver)
      Process.wait(@driver)
    end
    @driver = @session = nil
  end

  private

  def pointer(actions)
    command(:post, "actions", actions: [{ type: "pointer", id: "mouse", parameters: { pointerType: "mouse" }, actions: actions }])
    command(:delete, "actions")
  end

  def wait_ready
    deadline = Time.now + 30
    loop do
      return if request(:get, "/status")["ready"]
    rescue SystemCallError, EOFError, Net::ReadTimeout
      raise "chromedriver did not start" if Time.now > deadline

      sleep 0.1
    end
  end

  def command(verb, path, body = nil)
    request(verb, "/session/#{@session}/#{path}", body)
  end

  def request(verb, path, body = nil)
    http = Net::HTTP.new("127.0.0.1", @port)
    http.read_timeout = 120
    req = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(verb).new(path)
    if body
      req["Content-Type"] = "application/json"
      req.body = JSON.dump(body)
    end
    res = JSON.parse(http.request(req).body)
    value = res.is_a?(Hash) && res.key?("value") ? res["value"] : res
    raise "WebDriver #{verb} #{path}: #{value['message']}" if value.is_a?(Hash) && value["error"]

    value
  end
end

# For specs with a report open in `browser` on `dump` (Browser.explorer): the explorer's panel for a
# chunk under a real pointer.
module ExplorerPointer
  def hex(address)
    "0x#{address.to_s(16)}"
  end

  # Hovers over the chunk (at 16 bytes a pixel, where one pixel is one chunk) and returns the panel.
  def hover(chunk)
    view = PtmallocDump::Explorer.new(dump).views.find { |v| v[:heaps].any? { |h| h.index == chunk.heap.index } }
    target = chunk.address + [16, chunk.size / 2].min
    row = PtmallocDump::ExplorerGeometry.row_centering(view[:heaps], target, 16)
    shown = browser.script("return window.ptmdExplorer.show(#{view[:group].to_s.to_json}, 16, #{row})")
    x, y = PtmallocDump::ExplorerGeometry.new(view[:heaps], shown["bpp"], shown["row"]).pixel_for(target)
    browser.script("document.getElementById('explorer').scrollIntoView()")
    left, top = browser.script("const c = document.getElementById('xp-map'), r = c.getBoundingClientRect(); " \
                               "return [r.left + c.clientLeft, r.top + c.clientTop]")
    browser.move_to((left + x).ceil, (top + y).ceil)
    browser.script("const o = {}; document.querySelectorAll('#xp-panel [data-k]').forEach(e => o[e.dataset.k] = e.textContent); return o")
  end
end
